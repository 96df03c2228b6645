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


def test_numpy_scalars_and_any_case_are_stored_as_the_checks_return_them():
    import numpy as np  # only this test builds NumPy scalars

    from kmtrf_core.training.runs import cache_key  # the key is JSON of the fields: they must be Python numbers

    config = TrainConfig(d=np.int64(2), k=np.int32(3), n=16, steps=np.int64(5), tau=np.float32(0.5),
                         seeds=np.int64(3), family="Normal", trim=np.float64(0.1))
    assert (config.d, config.k, config.steps, config.seeds, config.family) == (2, 3, 5, (3,), "normal")
    assert type(config.steps) is int and type(config.tau) is float and config.tau == 0.5
    assert cache_key(config) == cache_key(TrainConfig(d=2, k=3, n=16, steps=5, tau=0.5, seeds=3, trim=0.1))
    assert TrainConfig(gamma=1).gamma == 1 and type(TrainConfig(gamma=1).gamma) is int  # Python numbers kept as given
