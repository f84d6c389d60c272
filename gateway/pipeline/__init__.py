"""The request pipeline: one typed :class:`~gateway.pipeline.flow.Flow` per request goes
through ordered stages (authenticate, parse, plan, admit, dispatch, respond, settle),
each a small module here. A stage that answers the request raises a GatewayError.
"""
