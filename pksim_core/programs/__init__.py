"""Whole multi-GPU problems as programs (docs/programs.md): the format, its strict loader and
checks, and the prediction of a program three ways: the baseline as PyTorch + NCCL run it,
pksim's best, and the communication-aware roofline."""
from pksim_core.programs.load import list_programs, load_program, parse_program, program_path
from pksim_core.programs.model import ProcessGroup, Op, ProgramSpec, Tensor
from pksim_core.programs.predict import ProgramPrediction, predict_program
from pksim_core.programs.roofline import roofline

__all__ = ["list_programs", "load_program", "parse_program", "program_path", "Program", "Op",
           "Tensor", "Group", "predict_program", "ProgramPrediction", "roofline"]
