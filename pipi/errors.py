"""Error hierarchy: every message says what is wrong and how to fix it."""


class PipiError(Exception):
    """Base class of every error pipi raises on purpose."""


class ConfigError(PipiError):
    """A configuration value is invalid."""


class DataError(PipiError):
    """Input data (a release, a manifest, a staged folder) is malformed."""


class UnknownCellError(ConfigError):
    """A cell name is not in the cell table."""


class TrackingError(PipiError):
    """The MLflow tracking server or registry cannot be used."""


class ServerGoneError(TrackingError):
    """The tracking server stopped answering for longer than the client's retry budget."""



class ArtifactStoreError(TrackingError):
    """The artifact store is full or refuses writes (the server answers, its store does not)."""
