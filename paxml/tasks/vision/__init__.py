"""Vision tasks: experiments (`paxml.tasks.vision.params`), image-folder
ImageNet inputs (`input_generator`) and ResNet preprocessing
(`resnet_preprocessing`)."""
