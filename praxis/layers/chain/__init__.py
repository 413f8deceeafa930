"""`Chain`: layers that pass an argument stack along, and config helpers.

Public names: Chain, call_chain, chain, copy_n_times, repeat, add_residual,
apply_padding, dict_to_args, feed_forward, full_like, kwargs_with_name,
log_args.
"""

from praxis.layers.chain import chain as _chain_lib
from praxis.layers.chain import chain_extensions as _extensions

Chain = _chain_lib.Chain
call_chain = _chain_lib.call_chain
add_residual = _extensions.add_residual
apply_padding = _extensions.apply_padding
chain = _extensions.chain
copy_n_times = _extensions.copy_n_times
dict_to_args = _extensions.dict_to_args
feed_forward = _extensions.feed_forward
full_like = _extensions.full_like
kwargs_with_name = _extensions.kwargs_with_name
log_args = _extensions.log_args
repeat = _extensions.repeat
