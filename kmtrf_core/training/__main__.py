"""``python -m kmtrf_core.training``: the training command line (:mod:`kmtrf_core.training.cli`)."""

from .cli import main

raise SystemExit(main())
