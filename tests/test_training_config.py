"""initial_layer: the untrained layer a run starts from (kmtrf_core.training.config)."""

from kmtrf_core.training import TrainConfig



def test_initial_layer_is_where_training_starts():
    import dataclasses

    import torch

    from kmtrf_core.training import train
    from kmtrf_core.training.config import initial_layer

    config = TrainConfig(d=2, k=3, n=16, scheme="bn", seeds=(4, 7), steps=1, batch=2, val_tasks=2, val_every=1,
                         lr=1e-12)
    start = initial_layer(config)
    trained, _ = train(config)  # one Adam step of 1e-12: the weights are the initial ones to rounding
    for name, value in start.state_dict().items():
        assert torch.allclose(value, trained.state_dict()[name], atol=1e-9), name
    other = initial_layer(dataclasses.replace(config, seeds=(5, 7)))
    assert not torch.equal(other.Q[0], start.Q[0]) and torch.equal(other.Q[1], start.Q[1])
