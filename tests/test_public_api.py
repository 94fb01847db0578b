"""The public namespace is curated: exactly these names, errors in one family."""

import amnet


def test_public_surface():
    import types

    public = {n for n in dir(amnet)
              if not n.startswith("_") and not isinstance(getattr(amnet, n), types.ModuleType)}
    assert public == {
        "MAX_ARGS", "AMArgumentError", "AMContextError", "AMNetError", "AccessRegion",
        "AtomicError", "BarrierMismatch", "BarrierStateError", "CollectiveMismatch", "Config",
        "ConfigError", "Endpoint", "Extension", "Handle", "HandlerCategoryError", "HandlerMismatch",
        "HandlerNotRegistered", "InitError", "JobAborted", "JobFailed", "PayloadTooLarge",
        "Op", "Port", "PshmAttachError", "PshmSpaceError",
        "RPCError", "RankError", "RemoteTraceback", "SegmentBoundsError", "Token", "Topology",
        "TopologyError", "abort", "config", "endpoint", "finalize", "handler", "init",
        "register_extension", "run",
        "wait_all",
        "wait_any",
    }
    assert set(amnet.__all__) == public


def test_errors_are_one_family():
    for name in ("AMArgumentError", "AMContextError", "AtomicError", "BarrierMismatch",
                 "BarrierStateError", "CollectiveMismatch", "ConfigError", "HandlerCategoryError",
                 "HandlerMismatch", "HandlerNotRegistered", "InitError", "JobAborted",
                 "JobFailed", "PayloadTooLarge", "PshmAttachError",
                 "PshmSpaceError", "RPCError", "RankError", "SegmentBoundsError",
                 "TopologyError"):
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


def test_errors_have_public_names_and_pickle():
    import pickle

    assert amnet.BarrierMismatch.__module__ == "amnet"
    for exc in (amnet.JobAborted("gone", 3), amnet.JobFailed("bad", 7),
                amnet.BarrierMismatch("x"), amnet.RemoteTraceback("tb")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc)
    assert pickle.loads(pickle.dumps(amnet.JobFailed("bad", 7))).code == 7


def test_config_of_a_plain_process():
    assert isinstance(amnet.config, amnet.Config)
    assert amnet.config.segment_size >= 4096


def test_aio_surface():
    import types

    import amnet.aio

    public = {n for n in dir(amnet.aio) if not n.startswith("_")
              and not isinstance(getattr(amnet.aio, n), types.ModuleType)}
    assert public == {"Promise", "as_future", "attach", "awaitable", "defer", "loop_of",
                      "on_complete", "run", "when_all"}
    assert set(amnet.aio.__all__) == public
    for name in public:  # each says what it raises, or is a class documenting its methods
        assert getattr(amnet.aio, name).__doc__, name
