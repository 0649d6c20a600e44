"""Errors caused by what the user asked for, as opposed to bugs.

The CLI prints a UserInputError as one line and exits with code 2; anything
else is a bug and keeps its traceback.
"""


class UserInputError(ValueError):
    """Bad input: the message says what is wrong and what to do instead."""


class UserInputTypeError(UserInputError, TypeError):
    """Bad input of the wrong type (gpu_count="two", model_name=123): a ValueError and a TypeError both."""


class ConfigFieldError(UserInputError):
    """A model config.json that is missing a field or holds a wrong value."""

    def __init__(self, source: str, field: str, problem: str):
        self.source = source
        self.field = field
        super().__init__(f"{source}: field '{field}' {problem}")
