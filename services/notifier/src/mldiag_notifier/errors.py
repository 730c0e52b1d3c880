"""The notifier's errors, each with a stable code (mapped to HTTP once, by the platform)."""

from mldiag_platform.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound


class InvalidResourceId(InvalidArgument):
    """A project, location, channel or rule id in the path or query is not a valid id."""

    code = "invalid_resource_id"


class InvalidUpdateMask(InvalidArgument):
    """``updateMask`` names a field that cannot be changed (or none)."""

    code = "invalid_update_mask"


class UnknownChannel(InvalidArgument):
    """A rule names a channel that does not exist in its project and location."""

    code = "unknown_channel"


class ChannelNotFound(NotFound):
    """No such notification channel."""

    code = "channel_not_found"


class RuleNotFound(NotFound):
    """No such alert rule."""

    code = "rule_not_found"


class ChannelExists(AlreadyExists):
    """A channel with that id exists already."""

    code = "channel_exists"


class RuleExists(AlreadyExists):
    """A rule with that id exists already."""

    code = "rule_exists"


class ChannelInUse(FailedPrecondition):
    """The channel is named by rules: they must stop naming it before it is deleted (a 409,
    the platform's failed precondition: the caller must change other resources first)."""

    code = "channel_in_use"


class UnknownRun(NotFound):
    """An event's run is not in the read model yet (its created fact may still be on its way):
    retryable, so the bus redelivers the event a moment later."""

    code = "unknown_run"
    retryable = True
