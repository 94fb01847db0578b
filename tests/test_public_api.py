"""The public namespace is curated: exactly these names, errors in one family."""

import amnet


def test_public_surface():
    import types

    public = {n for n in dir(amnet)
              if not n.startswith("_") and not isinstance(getattr(amnet, n), types.ModuleType)}
    assert public == {
        "AMNetError", "BarrierMismatch", "CollectiveMismatch", "Config", "ConfigError",
        "Endpoint", "InitError", "JobAborted", "JobFailed", "RankError", "RemoteTraceback",
        "Topology", "TopologyError", "abort", "finalize", "init", "run",
    }
    assert set(amnet.__all__) == public


def test_errors_are_one_family():
    for name in ("BarrierMismatch", "CollectiveMismatch", "ConfigError", "InitError",
                 "JobAborted", "JobFailed", "RankError", "TopologyError"):
        assert issubclass(getattr(amnet, name), amnet.AMNetError), name
    assert issubclass(amnet.BarrierMismatch, amnet.CollectiveMismatch)
    assert issubclass(amnet.TopologyError, amnet.ConfigError)


def test_errors_document_when_they_are_raised():
    for name in amnet.__all__:
        obj = getattr(amnet, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            if obj in (amnet.AMNetError, amnet.RemoteTraceback):
                continue
            assert obj.__doc__ and "raised" in obj.__doc__.lower(), name


def test_run_stays_callable_after_importing_the_module():
    import importlib

    importlib.import_module("amnet.run")
    assert callable(amnet.run)
