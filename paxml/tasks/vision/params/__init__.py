"""Vision experiments: `mnist.MnistExperiment`, `digits.DigitsExperiment`."""
