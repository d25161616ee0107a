"""What a client is told when the server refuses a request: an `InputError` carries its HTTP status.

Every `tformer.errors.UserError` that a request's checks or the library raise is the client's to fix and is
answered by one handler (`app.add_error_handlers`) as {"error": one line}: with its own status where it is an
InputError (422 for a bad value, 404 for an endpoint the model does not serve, 408, 413), else 422. Anything
else is a fault of the server (`refusal`: a 500, or a stream's error event, with its traceback logged).
"""

from __future__ import annotations

import logging

from tformer.errors import UserError

LOG = logging.getLogger("tformer.serve")


class InputError(UserError):
    """A request the server refuses: `status` is the HTTP status (422: a bad value; 404: an endpoint this
    model does not have), the message one line naming the value and what is allowed."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def status_of(e: UserError) -> int:
    """The HTTP status of a refusal: an InputError's own, else 422 (a value the library refused)."""
    return getattr(e, "status", 422)


def error_message(e: BaseException) -> str:
    """The first line of an error's message (its type's name where it has none)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def refusal(e: BaseException) -> str:
    """The one line a client reads: the user's error as it is; a fault of the server named as one, with its
    traceback in the server's log."""
    if isinstance(e, UserError):
        return error_message(e)
    LOG.error("internal error", exc_info=e)
    return f"internal error ({type(e).__name__}: {error_message(e)})"


__all__ = ["InputError", "error_message", "refusal", "status_of"]
