"""Vision experiments: `mnist.MnistExperiment`, `digits.DigitsExperiment`,
`imagenet_resnets.ResNet50Pjit`."""
