"""Video layers: 3-D CNN tokenizers (VQ-VAE / VQ-GAN), quantizers, losses.

Public modules: enc_dec_3dcnn, losses, quantizer, vqvae.
"""

from praxis.layers.video import enc_dec_3dcnn
from praxis.layers.video import losses
from praxis.layers.video import quantizer
from praxis.layers.video import vqvae
