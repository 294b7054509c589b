"""pksim: predict, search and generate multi-GPU kernels on modelled topologies."""
__version__ = "0.1.0"
