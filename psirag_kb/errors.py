"""Errors whose messages say what went wrong and what to do next."""

from __future__ import annotations


class KBError(Exception):
    """Base class for every error the knowledge base reports to a user."""


class ConfigError(KBError):
    """The configuration file or a setting is invalid."""


class SkippedFile(KBError):
    """A file deliberately not indexed (unsupported, binary, empty, too large, undecodable)."""

    def __init__(self, reason: str, *, incomplete: bool = False, damaged: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.incomplete = incomplete
        """The file looks cut short (a zip without its end): if it was just written, its writer
        may not have finished, so it is retried instead of skipped."""
        self.damaged = damaged
        """A reader raised on the content (a damaged save, or a bug in the reader): a file
        indexed before keeps its chunks and is marked failed, to be read again."""


class FileReadError(KBError):
    """A file could not be read right now (vanished, unreadable, locked); it may be retried."""


class ModelMismatchError(KBError):
    """The knowledge base was built with a different embedding model or dimension."""


class StoreError(KBError):
    """The on-disk stores are unusable (corrupted, locked by another process)."""


class NewerDataError(StoreError):
    """The data directory was written by a newer release (a schema above this one's): the
    message names both releases and what to do."""


class LLMError(KBError):
    """The language model server failed, is unreachable or returned something unusable."""


class Ungrounded(LLMError):
    """The model's reply is not supported by the text it was given (an invention or a copy)."""


class LLMUnavailable(LLMError):
    """The language model server cannot serve requests now: down, too slow, failing or no model."""


class NodeNotFound(KBError):
    """A tree node id that does not exist."""


class TreeEmpty(KBError):
    """No topic tree to show yet: nothing is indexed, the first ingest has not ended (it
    builds the tree once, at its end) or the tree is being rebuilt."""


class ChunkNotFound(NodeNotFound):
    """A chunk id that does not exist (never indexed, or its file changed since)."""


class AccessDenied(KBError):
    """A person's role or grants do not allow what they asked (a reindex, ingest or removal
    outside what they may write; answered 403)."""


class ConversationNotFound(NodeNotFound):
    """A conversation id that does not exist or belongs to someone else (the same answer)."""


class Cancelled(Exception):
    """Raised inside a write task that was asked to stop after its committed batch."""
