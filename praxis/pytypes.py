"""Type aliases used across praxis and paxml annotations.

Public API: `NestedMap` (the class from `praxis.py_utils`), `JTensor`,
`PRNGKey`, `NpTensor`, `JTensorOrPartitionSpec`, `SummaryDict`, `PyTreeDef`,
`Nested` (generic: `Nested[T]`), `NestedJTensor`, `NestedNpTensor`,
`NestedBool`, `NestedInt`, `NestedHParams`, `NestedPartitionSpec`,
`NestedJTensorOrPartitionSpec`, `NestedShapeDtypeStruct`,
`NestedShapedArray`, `NestedShapeDtypeLike`, `DimShardingAnnotation`,
`SplitDimsMapping`, `WeightedScalar`, `WeightedScalars`,
`WeightedScalarsList`, `Metrics`, `LogicalAxisRules`, `DotGeneralT`, and the
legacy `HParams`, `HParamsT`, `InstantiableParams` (all `typing.Any`).

Only JAX, numpy and `praxis.py_utils` are imported, so every module can use
these aliases without import cycles. Upstream's jaxtyping helpers
(`JaxArrayT`, `Float`, ...) are not provided.
"""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

from praxis import py_utils

NestedMap = py_utils.NestedMap

HParams = py_utils.HParams
HParamsT = py_utils.HParams
InstantiableParams = py_utils.InstantiableParams

JTensor = jax.Array
PRNGKey = jax.Array
NpTensor = np.ndarray
JTensorOrPartitionSpec = JTensor | jax.sharding.PartitionSpec
SummaryDict = NestedMap | dict[str, JTensor]
PyTreeDef = jax.tree_util.PyTreeDef

T = TypeVar('T')
Nested = T | tuple[Any, ...] | list[Any] | dict[str, Any] | NestedMap
NestedJTensor = Nested[JTensor]
NestedNpTensor = Nested[NpTensor]
NestedBool = Nested[bool]
NestedInt = Nested[int]
NestedHParams = Nested[HParamsT]
NestedPartitionSpec = Nested[jax.sharding.PartitionSpec]
NestedJTensorOrPartitionSpec = Nested[JTensorOrPartitionSpec]
NestedShapeDtypeStruct = Nested[jax.ShapeDtypeStruct]
NestedShapedArray = Nested[jax.core.ShapedArray]
NestedShapeDtypeLike = (
    NestedJTensor | NestedNpTensor | NestedShapeDtypeStruct | NestedShapedArray
)

# One tensor dim's sharding: a mesh axis name, several names, an int mesh
# dim, or None (replicated).
DimShardingAnnotation = Sequence[int | str] | int | str | None
SplitDimsMapping = Sequence[DimShardingAnnotation] | None

# (value, weight) pairs reported by models; weighted means are sum(v*w)/sum(w).
WeightedScalar = tuple[JTensor, JTensor]
WeightedScalars = dict[str, WeightedScalar] | NestedMap
WeightedScalarsList = dict[str, Sequence[WeightedScalar]] | NestedMap
# Upstream: dict of `clu.metrics.Metric`; clu is not a dependency here.
Metrics = NestedMap | dict[str, Any]

LogicalAxisRules = Sequence[tuple[str, str | None]]
# Signature of `jax.lax.dot_general`, for pluggable einsum/matmul ops.
DotGeneralT = Callable[..., jax.Array]
