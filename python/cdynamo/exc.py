# exc.py — owns cdynamo's exception and warning classes (raised by the Python layer and by the C++ core).


class CdynamoError(RuntimeError):
    """Base class of every error cdynamo raises on purpose."""


class Unsupported(CdynamoError):
    """A construct cannot be captured and nopython/fullgraph (or export) asked for an error."""


class InvalidBackend(CdynamoError, ValueError):
    """A backend name that is neither registered nor provided by an installed entry point."""

    def __init__(self, name, available=()):
        self.name = name
        self.available = sorted(available)
        listing = ", ".join(self.available) if self.available else "(none)"
        super().__init__(
            f"Invalid backend: {name!r}. Available backends: {listing}. "
            "Register one with cdynamo.register_backend or pass a callable."
        )


class BackendCompilerFailed(CdynamoError):
    """The backend raised while compiling a graph; the original exception is the __cause__."""

    def __init__(self, backend_name, inner):
        self.backend_name = backend_name
        self.inner_exception = inner
        super().__init__(f"backend {backend_name!r} raised {type(inner).__name__}: {inner}")


class InternalError(CdynamoError):
    """A bug in cdynamo itself."""


class CdynamoWarning(UserWarning):
    """Category of cdynamo's 'running as plain Python' warnings (filter with warnings.filterwarnings)."""
