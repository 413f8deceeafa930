"""Small layers and models for unit tests (as Pax's praxis.layers.test_layers).

Public names: ProjectionLayer, AddOneLayer, TestLayer, VarUnusedLayer,
TestModel01, TestLinearRegressionModel, TestBatchNormalizationModel,
TestSpmdModel.
"""

from jax import numpy as jnp

from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field


def _one(x: JTensor) -> JTensor:
  return jnp.array(1.0, x.dtype)


class ProjectionLayer(base_layer.BaseLayer):
  """Linear then Bias: inputs [..., input_dims] -> [..., output_dims].

  Attributes:
    input_dims: Depth of the inputs.
    output_dims: Depth of the outputs.
  """

  input_dims: int = 0
  output_dims: int = 0

  def setup(self) -> None:
    self.create_child('linear', pax_fiddle.Config(
        linears.Linear, input_dims=self.input_dims,
        output_dims=self.output_dims))
    self.create_child('bias', pax_fiddle.Config(
        linears.Bias, dims=self.output_dims))

  def __call__(self, inputs: JTensor) -> JTensor:
    return self.bias(self.linear(inputs))


class AddOneLayer(base_layer.BaseLayer):
  """inputs + 1 (a layer without variables)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return inputs + 1.0


class TestLayer(base_layer.BaseLayer):
  """Two Linear+Bias pairs (2 -> 3 -> 4), a [4, 5] projection, then +1."""

  def setup(self) -> None:
    self.create_children('linear', [
        pax_fiddle.Config(linears.Linear, input_dims=2, output_dims=3),
        pax_fiddle.Config(linears.Linear, input_dims=3, output_dims=4),
    ])
    self.create_children('bias', [
        pax_fiddle.Config(linears.Bias, dims=3),
        pax_fiddle.Config(linears.Bias, dims=4),
    ])
    self.create_child('add_one', pax_fiddle.Config(AddOneLayer))
    self.create_variable('final_proj', WeightHParams(shape=[4, 5]))

  def __call__(self, inputs: JTensor) -> JTensor:
    x = self.bias[0](self.linear[0](inputs))
    x = self.bias[1](self.linear[1](x))
    return self.add_one(linears.project_last_dim(x, self.theta.final_proj))


class VarUnusedLayer(base_layer.BaseLayer):
  """sum(inputs @ var01); var02 exists but is not used.

  Attributes:
    input_dims: Depth of the inputs.
    output_dims: Depth of the projection.
  """

  input_dims: int = 0
  output_dims: int = 0

  def setup(self) -> None:
    shape = [self.input_dims, self.output_dims]
    self.create_variable('var01', WeightHParams(shape=shape))
    self.create_variable('var02', WeightHParams(shape=shape))

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.sum(jnp.einsum('bi,io->bo', inputs, self.theta.var01))


class TestModel01(base_model.BaseModel):
  """BatchNorm then a projection; loss = sum(predictions), var02 unused.

  Attributes:
    input_dims: Depth of the inputs.
    output_dims: Depth of the predictions.
  """

  input_dims: int = 0
  output_dims: int = 0

  def setup(self) -> None:
    self.create_child('bn', pax_fiddle.Config(
        normalizations.BatchNorm, name='bn', dim=self.input_dims))
    shape = [self.input_dims, self.output_dims]
    self.create_variable('var01', WeightHParams(shape=shape))
    self.create_variable('var02', WeightHParams(shape=shape))

  def compute_predictions(self, input_batch: NestedMap) -> JTensor:
    normed = self.bn(input_batch.inputs)
    return jnp.einsum('bi,io->bo', normed, self.theta.var01)

  def compute_loss(self, predictions: JTensor, input_batch: NestedMap):
    del input_batch
    loss = jnp.sum(predictions)
    loss02 = jnp.sum(predictions * predictions)  # An eval metric.
    metrics = NestedMap(loss=(loss, _one(loss)),
                        loss02=(loss02, _one(loss02)))
    return metrics, NestedMap()


class TestLinearRegressionModel(base_model.BaseModel):
  """A linear layer fit by mean squared error to input_batch.targets.

  Attributes:
    input_dims: Depth of the inputs.
    output_dims: Depth of the targets.
    linear_p: The linear layer's template.
  """

  input_dims: int = 0
  output_dims: int = 0
  linear_p: LayerTpl = template_field(linears.Linear)

  def setup(self) -> None:
    self.create_child('linear', self.linear_p.clone().set(
        input_dims=self.input_dims, output_dims=self.output_dims))

  def compute_predictions(self, input_batch: NestedMap) -> JTensor:
    return self.linear(input_batch.inputs)

  def compute_loss(self, predictions: JTensor, input_batch: NestedMap):
    loss = jnp.mean(jnp.square(predictions - input_batch.targets))
    return (NestedMap(loss=(loss, _one(loss))),
            NestedMap(predictions=predictions))


class TestBatchNormalizationModel(base_model.BaseModel):
  """BatchNorm fit by mean squared error (its summaries switched on).

  Attributes:
    input_dims: Depth of the inputs.
  """

  input_dims: int = 0

  def setup(self) -> None:
    self.create_child('bn', pax_fiddle.Config(
        normalizations.BatchNorm, name='bn', dim=self.input_dims))

  def compute_predictions(self, input_batch: NestedMap) -> JTensor:
    params = base_layer.cur_jax_context().hparams.clone()
    params.summary_verbosity = 4  # BatchNorm's summaries, for the tests.
    with base_layer.JaxContext.new_context(hparams=params):
      return self.bn(input_batch.inputs)

  def compute_loss(self, predictions: JTensor, input_batch: NestedMap):
    loss = jnp.mean(jnp.square(predictions - input_batch.targets))
    return (NestedMap(loss=(loss, _one(loss))),
            NestedMap(predictions=predictions))


class TestSpmdModel(base_model.BaseModel):
  """A TransformerFeedForward; loss = mean(predictions^2).

  Attributes:
    xformer_ffw: The feed-forward block.
  """

  xformer_ffw: LayerTpl = template_field(transformers.TransformerFeedForward)

  def setup(self) -> None:
    self.create_child('ffwd', self.xformer_ffw)

  def compute_predictions(self, input_batch: NestedMap) -> JTensor:
    return self.ffwd(input_batch.inputs)

  def compute_loss(self, predictions: JTensor, input_batch: NestedMap):
    del input_batch
    loss = jnp.mean(jnp.square(predictions))
    return (NestedMap(loss=(loss, _one(loss))),
            NestedMap(predictions=predictions))
