"""Online evaluation: a sampled share of answered requests is also answered by the
route's reference model and judged pairwise (both answer orders), off the client's time;
labels from the judge and from the application (`POST /v1/feedback`) are stored once per
request id and metric, and measured quality per route, served model and request kind is
derived from them (docs/evaluation.md).

    plans.py      which requests are evaluated, with what (settings resolved, sampling)
    answers.py    the served answer's text and the conversation, from what respond saw
    labels.py     the label and request-note records
    store.py      the labels store contract and its in-memory form (dev, one process)
    redis_store.py  the Redis form: once per request id and metric, bounded, with TTLs
    journal.py    the Redis job journal: sampled jobs kept until finished, claimed by
                  another process when theirs stopped
    evaluator.py  the bounded queue and its workers: reference, judge, label
    daily_cap.py  each call's worst case reserved against the daily cap, then settled
    feedback.py   an application's feedback checked against the declared metrics
    quality.py    measured quality (ratio and its interval) and savings from labels
"""
