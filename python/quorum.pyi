"""Quorum: an ONNX runtime whose accelerated answers are checked, with onnxruntime's Python API."""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, Union

import numpy as np

__version__: str

class QuorumError(RuntimeError):
    """Every error Quorum raises."""

class InvalidArgument(QuorumError):
    """A bad input: an unknown name, a wrong dtype or shape."""

class Fail(QuorumError):
    """A node failed while running."""

class NoSuchFile(QuorumError):
    """A file could not be read."""

class InvalidGraph(QuorumError):
    """The model is malformed or invalid."""

class NotImplemented(QuorumError):
    """The model uses an op, opset or type Quorum does not run."""

class RuntimeException(QuorumError):
    """A provider or device failed."""

class VerificationFailed(QuorumError):
    """Strict verification: an accelerated result is outside its bound, or could not be judged."""

class GraphOptimizationLevel:
    """onnxruntime's levels; any but ORT_DISABLE_ALL turns Quorum's bit-exact rewrites on."""

    ORT_DISABLE_ALL: GraphOptimizationLevel
    ORT_ENABLE_BASIC: GraphOptimizationLevel
    ORT_ENABLE_EXTENDED: GraphOptimizationLevel
    ORT_ENABLE_ALL: GraphOptimizationLevel

class RunOptions:
    """Accepted where onnxruntime takes one; nothing in it changes a run."""

    log_severity_level: int
    log_verbosity_level: int
    run_tag: str
    terminate: bool
    def __init__(self) -> None: ...

class SessionOptions:
    """onnxruntime's session options, and Quorum's own.

    Without effect, accepted for compatibility: intra_op_num_threads, inter_op_num_threads (the CPU
    threads are one rayon pool per process, sized by RAYON_NUM_THREADS), execution_mode,
    log_severity_level, log_verbosity_level, enable_mem_pattern, enable_profiling, logid.
    """

    graph_optimization_level: GraphOptimizationLevel
    enable_cpu_mem_arena: bool
    intra_op_num_threads: int
    inter_op_num_threads: int
    execution_mode: int
    log_severity_level: int
    log_verbosity_level: int
    enable_mem_pattern: bool
    enable_profiling: bool
    logid: str
    verify: str
    """off, shadow, strict, sample[=N[:K]] or sample-strict[=N[:K]]."""
    allow_unchecked: list[str]
    """Op types strict verification lets through when the oracles cannot judge them."""
    streams: int
    """Device streams a run may use."""
    graph_capture: str
    """Device graph capture: off, on or auto."""
    precision: str
    """Arithmetic of the model's f32 values: f32 (exact), tf32 (tensor cores for f32 products), or
    f16 / bf16 (the model converted to that type when the session is built)."""
    keep_f32: list[str]
    """Op types kept in f32 when precision is f16 or bf16, beside the default list."""
    dims: dict[str, int]
    """Values of symbolic dimensions."""
    max_tensor_bytes: int
    def __init__(self) -> None: ...
    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        """Gives a symbolic dimension its value (as onnxruntime does)."""

class NodeArg:
    """A model input or output."""

    name: str
    shape: list[Union[int, str, None]] | None
    type: str
    """onnxruntime's spelling: tensor(float), tensor(int64), seq(tensor(float))..."""

Provider = Union[str, tuple[str, Mapping[str, Any]]]

class InferenceSession:
    """A loaded model, ready to run (onnxruntime's InferenceSession)."""

    def __init__(
        self,
        path_or_bytes: Union[str, bytes, os.PathLike[str]],
        sess_options: SessionOptions | None = None,
        providers: Sequence[Provider] | str | None = None,
        provider_options: Any = None,
        **kwargs: Any,
    ) -> None:
        """Loads a model from a path or bytes. providers: onnxruntime's names
        (CPUExecutionProvider, CUDAExecutionProvider, WebGpuExecutionProvider) or Quorum's (cpu,
        cuda, wgpu, sim, auto); one this machine cannot use is left out with a UserWarning."""
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Runs the model; the outputs asked for (all for None), as numpy arrays (a list of
        arrays for a sequence, None for an empty optional). The GIL is released while it runs."""
    def get_inputs(self) -> list[NodeArg]:
        """The inputs a caller feeds (initializers left out)."""
    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs."""
    def get_providers(self) -> list[str]:
        """The providers this session places nodes on, by onnxruntime's names."""
    def placement(self) -> list[dict[str, Any]]:
        """Where each node runs: node, op, provider, declined (why an accelerator did not take it)."""
    def verification(self) -> dict[str, dict[str, Any]]:
        """Per op: checked, mismatched, unsettled and reasons [(reason, count)]."""
    def counters(self) -> dict[str, int]:
        """Runs, copies, launches, checks... by name."""
    def fallback_nodes(self) -> list[str]:
        """Nodes that ran on the CPU although an accelerator was listed."""

def get_available_providers() -> list[str]:
    """The providers usable here, accelerators first, by onnxruntime's names."""

def get_device() -> str:
    """GPU where CUDA is usable here, else CPU."""

def compare(
    model: Union[str, os.PathLike[str]],
    input_feed: Mapping[str, np.ndarray],
    a: str = "cuda",
    b: str = "cpu",
    sess_options: SessionOptions | None = None,
) -> list[dict[str, Any]]:
    """Every node of the model on placement a (suspected) against b (trusted): node, op, placed,
    verdict (identical, agrees, diverges, unjudged) and detail, in graph order."""
