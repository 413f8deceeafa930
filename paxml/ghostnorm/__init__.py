"""Ghost-norm clipping: per-example gradient norms without per-example grads.

See `base` for the protocol, `linears`/`embedding` for layers that implement
it, and `generic_wrapper` to make any other layer follow it.
"""
