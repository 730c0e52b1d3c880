"""The base every contract model derives from: camelCase on the wire, NaN and ±Inf kept."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Contract(BaseModel):
    """A frozen wire model.

    Fields are snake_case in Python and camelCase in JSON (the Google API style our REST
    resources follow). Non-finite floats are written as the JSON tokens ``NaN``,
    ``Infinity`` and ``-Infinity`` rather than pydantic's default ``null``, because a NaN
    loss is exactly the data a diagnosis needs.
    """

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        ser_json_inf_nan="constants",
        extra="forbid",
        use_enum_values=False,
    )
