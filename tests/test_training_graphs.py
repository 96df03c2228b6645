"""The CUDA-graph training step (kmtrf_core.training.graphs): what can be checked without a GPU.

The graph itself runs in tests/test_gpu.py where CUDA is present; here: which configs a graph can
hold, the refusals, Adam's switch, and the Stepper's order of work (warm-up, one capture, replays,
outputs copied) with torch.cuda's graph calls replaced by recorders.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from kmtrf_core.training import TrainConfig, train
from kmtrf_core.training.cli import main as cli_main
from kmtrf_core.training.graphs import GRAPH_WARMUP, Stepper, graph_obstacle, set_capturable

BASE = TrainConfig(d=2, k=3, n=16, steps=4, batch=2, val_tasks=2, val_every=2)


@pytest.mark.parametrize("changes,device,words", [
    ({}, "cpu", "CUDA device, not cpu"),
    ({}, "meta", "CUDA device, not meta"),
    ({"gamma_end": 4.0}, "cuda", "annealed gamma or tau"),
    ({"tau": 0.5, "tau_end": 0.05}, "cuda", "annealed gamma or tau"),
    ({"family": ("normal", "laplace")}, "cuda", "mixture of task families"),
])
def test_what_a_graph_cannot_hold_is_named(changes, device, words):
    assert words in graph_obstacle(dataclasses.replace(BASE, **changes), device)


@pytest.mark.parametrize("changes", [{}, {"family": "cauchy"}, {"omega": "ne", "unroll": 2, "clip": 1.0},
                                     {"seeds": (0, 1, 2)}, {"trim": 0.1}])
def test_a_plain_config_can_be_graphed_on_cuda(changes):
    assert graph_obstacle(dataclasses.replace(BASE, **changes), "cuda") is None


def test_train_and_the_command_line_refuse_a_graph_off_cuda(tmp_path, capsys):
    with pytest.raises(ValueError, match="graph=True: a CUDA graph needs a CUDA device"):
        train(BASE, graph=True)
    with pytest.raises(SystemExit):
        cli_main(["--d", "2", "--k", "3", "--steps", "2", "--graph", "--out", str(tmp_path / "run")])
    assert "--graph: a CUDA graph needs a CUDA device, not cpu" in capsys.readouterr().err


def test_a_graph_needs_a_capturable_optimizer():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="capturable optimizer"):
        Stepper(lambda step: None, torch.optim.Adam([p]), [], graph=True)


def test_set_capturable_switches_every_group_and_keeps_the_step_count():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    set_capturable(opt, True)
    assert opt.param_groups[0]["capturable"] is True and float(opt.state[p]["step"]) == 1.0
    set_capturable(opt, False)
    assert opt.param_groups[0]["capturable"] is False and opt.state[p]["step"].device.type == "cpu"
    opt.step()  # the eager form steps on
    assert float(opt.state[p]["step"]) == 2.0


def test_the_eager_stepper_is_the_training_step():
    calls = []
    stepper = Stepper(lambda step: calls.append(step) or (torch.ones(1), torch.ones(3, 1, dtype=torch.bool)),
                      torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))]), [])
    for step in range(1, 6):
        stepper(step)
    assert calls == [1, 2, 3, 4, 5] and not stepper.captured


class _Recorder:
    """Stands in for torch.cuda's streams and graphs, and logs what the Stepper asks of them."""

    def __init__(self):
        self.log = []

    def stream(self):
        recorder = self

        class Stream:
            def wait_stream(self, other):
                recorder.log.append("wait")

        return Stream()

    def graph_class(self):
        recorder = self

        class Graph:
            def register_generator_state(self, gen):
                recorder.log.append(("register", gen))

            def replay(self):
                recorder.log.append("replay")

        return Graph

    @contextlib.contextmanager
    def capture(self, graph):
        self.log.append("capture begins")
        yield
        self.log.append("capture ends")


def test_the_graphed_stepper_warms_up_captures_once_and_replays(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "Stream", rec.stream)
    monkeypatch.setattr(torch.cuda, "current_stream", rec.stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", rec.graph_class())
    monkeypatch.setattr(torch.cuda, "graph", rec.capture)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([p], capturable=True)
    p.grad = torch.ones(2)
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    calls = []

    def step_fn(step):
        calls.append(step)
        rec.log.append(f"step {step}")
        return torch.full((2,), float(step)), torch.ones(3, 2, dtype=torch.bool)

    stepper = Stepper(step_fn, opt, gens, graph=True)
    outs = [stepper(step) for step in range(1, GRAPH_WARMUP + 4)]
    # the warm-up steps run eagerly; the next call records one step (which runs nothing by itself) and replays it
    assert calls == list(range(1, GRAPH_WARMUP + 2)) and stepper.captured
    assert p.grad is None  # gradients were released before the capture, to be allocated inside it
    first_capture = rec.log.index("capture begins")
    assert rec.log[first_capture - 2:first_capture] == [("register", gens[0]), ("register", gens[1])]
    assert rec.log[first_capture + 1:first_capture + 3] == [f"step {GRAPH_WARMUP + 1}", "capture ends"]
    assert rec.log.count("replay") == 3 and rec.log.count("capture begins") == 1
    assert rec.log.count("wait") == 2 * GRAPH_WARMUP  # each warm-up step: side stream waits, then main stream
    replayed = outs[GRAPH_WARMUP:]
    assert all(out[0] is not stepper._out[0] for out in replayed)  # copies: the next replay overwrites the graph's
    assert [float(out[0][0]) for out in outs] == [1.0, 2.0, 3.0, 4.0, 4.0, 4.0]
