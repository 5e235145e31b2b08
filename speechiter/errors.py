"""Exception types and the exit codes the CLI maps them to.

Configuration and input errors exit with code 2 and print one line; anything
else exits with code 1. See handbook.md, "Errors" and "The command line".
"""


class SpeechiterError(Exception):
    """Base class of the errors speechiter raises on purpose."""

    exit_code = 1


class ConfigError(SpeechiterError, ValueError):
    """A bad data_cfg value. The message starts with the YAML path.

    >>> str(ConfigError("data_cfg.train.conf.batch_len", "expected a positive number, got -3"))
    'data_cfg.train.conf.batch_len: expected a positive number, got -3'
    """

    exit_code = 2

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self):
        return type(self), (self.path, self.message)


class DataError(SpeechiterError):
    """Bad input data: names the file (and line) or the utterance id."""

    exit_code = 2


class WorkerError(SpeechiterError, RuntimeError):
    """A failure inside a loading worker, re-raised in the main process.

    Carries the exit code of the original error (a DataError stays an input
    error, exit 2) and the worker-side traceback in the message.
    """

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self):
        return type(self), (self.args[0], self.exit_code)


class ResourceError(SpeechiterError, RuntimeError):
    """The machine lacks what loading needs: shared memory, open files, a working fork server.

    Exit code 1; the message says which resource, the numbers, and how to fix it.
    """
