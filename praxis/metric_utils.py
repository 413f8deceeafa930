"""Metric helpers, at Pax's path `praxis.metric_utils`.

Public names: top_k_accuracy.

`top_k_accuracy(top_k, logits, label_ids=None, label_probs=None,
weights=None)` is the weighted fraction of examples whose label's logit is
at least the k-th largest (ties count), over max(1, sum of weights); it is
the function the classification models report `accuracy`/`acc5` with
(`praxis.layers.classification_models`).
"""

from praxis.layers import classification_models

top_k_accuracy = classification_models.top_k_accuracy
