"""Errors about share links."""

from mldiag_platform.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated


class ShareLinkNotFound(NotFound):
    """No share link with that id."""

    code = "share_link_not_found"


class InvalidShareResource(InvalidArgument):
    """What was asked to be shared is not a run, an event or a profiler session."""

    code = "invalid_share_resource"


class ShareLinkInvalid(Unauthenticated):
    """The token is not one the registry signed (forged, altered or truncated)."""

    code = "share_link_invalid"


class ShareLinkExpired(Unauthenticated):
    """The link's time is up."""

    code = "share_link_expired"


class ShareLinkRevoked(Unauthenticated):
    """Someone revoked the link."""

    code = "share_link_revoked"


class OutsideShareScope(PermissionDenied):
    """The call reaches past what the link opens."""

    code = "outside_share_scope"
