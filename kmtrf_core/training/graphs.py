"""The training step as one CUDA graph: sampling, forward, loss, backward and Adam launched at once.

On a GPU the training step at the book's and the paper's sizes is a few
milliseconds of arithmetic spread over hundreds of small kernels, so its time
is the host launching them. :class:`Stepper` runs
:func:`~kmtrf_core.training.loop.training_step` eagerly, or, with
``graph=True`` on CUDA, eagerly for :data:`GRAPH_WARMUP` steps (on a side
stream, PyTorch's recipe for whole-network capture, so that autograd's and
Adam's buffers exist) and then records one step as a CUDA graph and replays it
for every later step. The recording is the same step: the task generators are
registered with the graph, so every replay draws the next tasks of each seed's
stream (the same numbers the eager step would draw), and Adam runs with
``capturable=True`` (its step count on the device). A graphed run therefore
equals the eager run up to floating-point order (capturable Adam orders its
bias correction differently), and it replays and resumes exactly like one.

What a graph cannot hold is checked first (:func:`graph_obstacle`): a device
other than CUDA, an annealed ``gamma`` or ``tau`` (the step's constants change
every step), and a mixture of task families (its sampler picks rows by a count
read from the device).
"""

from __future__ import annotations

import torch

from ..tasks import check_families
from .config import TrainConfig

__all__ = ["GRAPH_WARMUP", "Stepper", "graph_obstacle", "set_capturable"]

GRAPH_WARMUP = 3
"""Eager steps before the capture (PyTorch's recipe warms a captured network up with a few real steps)."""


def graph_obstacle(config: TrainConfig, device) -> str | None:
    """Why ``config``'s training step cannot run as one CUDA graph on ``device``; ``None`` when it can.

    >>> graph_obstacle(TrainConfig(d=2, k=3), "cpu")
    'a CUDA graph needs a CUDA device, not cpu'
    >>> graph_obstacle(TrainConfig(d=2, k=3, gamma_end=8.0), "cuda")
    'an annealed gamma or tau changes the constants of the step at every step'
    >>> graph_obstacle(TrainConfig(d=2, k=3), "cuda") is None
    True
    """
    device = torch.device(device)
    if device.type != "cuda":
        return f"a CUDA graph needs a CUDA device, not {device.type}"
    if config.gamma_end is not None or config.tau_end is not None:
        return "an annealed gamma or tau changes the constants of the step at every step"
    if len(check_families(config.family)) > 1:
        return "a mixture of task families picks its rows by a count read back from the device"
    return None


def set_capturable(optimizer: torch.optim.Optimizer, on: bool) -> None:
    """Switch Adam between its eager form and its capturable one (step counts on the parameters' device).

    Needed after ``load_state_dict``, which brings back the saved run's choice.

    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> opt = torch.optim.Adam([p], capturable=True)
    >>> set_capturable(opt, False); opt.param_groups[0]["capturable"]
    False
    """
    for group in optimizer.param_groups:
        group["capturable"] = on
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            if "step" in state:
                state["step"] = state["step"].to(p.device if on else "cpu")


class Stepper:
    """Takes training steps: eagerly, or as replays of one captured CUDA graph (``graph=True``).

    ``step_fn(step)`` is one step, :func:`~kmtrf_core.training.loop.training_step`
    bound to its model, ``optimizer``, config and ``task_gens``; it must
    return device tensors and read nothing back to the host.
    ``Stepper(...)(step)`` returns what it returns, still on the device. With
    ``graph``, ``optimizer`` must be capturable (:func:`set_capturable`) and
    :func:`graph_obstacle` must have nothing to say about the config (the
    caller checks it, :func:`~kmtrf_core.training.train` does).

    >>> from kmtrf_core.training.config import initial_layer
    >>> from kmtrf_core.training.loop import training_step
    >>> cfg = TrainConfig(d=2, k=3, n=16, batch=4)
    >>> model = initial_layer(cfg, "cpu")
    >>> opt, gens = torch.optim.Adam(model.parameters()), [torch.Generator().manual_seed(0)]
    >>> stepper = Stepper(lambda step: training_step(model, opt, cfg, gens, step), opt, gens)
    >>> losses, ok = stepper(1)
    >>> tuple(losses.shape), stepper.captured
    ((1,), False)
    """

    def __init__(self, step_fn, optimizer, task_gens, graph: bool = False):
        if graph and not all(group.get("capturable", False) for group in optimizer.param_groups):
            raise ValueError("graph=True needs a capturable optimizer (torch.optim.Adam(..., capturable=True))")
        self.step_fn, self.optimizer, self.task_gens = step_fn, optimizer, task_gens
        self.graph = graph
        self.warm = 0
        self._graph = None
        self._out = None

    @property
    def captured(self) -> bool:
        """Whether later steps replay the captured graph."""
        return self._graph is not None

    def __call__(self, step: int):
        if not self.graph:
            return self.step_fn(step)
        if self.warm < GRAPH_WARMUP:
            self.warm += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.step_fn(step)
            torch.cuda.current_stream().wait_stream(side)
            for tensor in out:
                tensor.record_stream(torch.cuda.current_stream())  # read (and freed) on the main stream later
            return out
        if self._graph is None:
            self._capture(step)
        self._graph.replay()  # runs the step that was recorded: this step's tasks, forward, backward and Adam
        return tuple(tensor.clone() for tensor in self._out)  # the graph's outputs are overwritten by the next replay

    def _capture(self, step: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # gradients are allocated inside the graph's own memory
        graph = torch.cuda.CUDAGraph()
        for gen in self.task_gens:  # every replay advances each seed's task stream as an eager step would
            graph.register_generator_state(gen)
        with torch.cuda.graph(graph):
            self._out = self.step_fn(step)
        self._graph = graph
