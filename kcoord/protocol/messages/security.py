"""Security APIs: SaslHandshake (17), SaslAuthenticate (36), the ACL APIs
DescribeAcls (29), CreateAcls (30), DeleteAcls (31), and the SCRAM
credential APIs DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

Field versions, nullability and defaults follow Kafka's message schemas.
ACL APIs keep v0 (LITERAL patterns only), which Kafka 3.x still serves.
"""
from ..schema import api, f

SASL_HANDSHAKE = api(17, "SaslHandshake", "0-1", "none", request=[
    f("mechanism", "string"),
], response=[
    f("error_code", "int16"),
    f("mechanisms", "[]string"),
])

SASL_AUTHENTICATE = api(36, "SaslAuthenticate", "0-2", "2+", request=[
    f("auth_bytes", "bytes"),
], response=[
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("auth_bytes", "bytes"),
    f("session_lifetime_ms", "int64", "1+", default=0),
])


def _filter_fields() -> list:
    return [
        f("resource_type_filter", "int8"),
        f("resource_name_filter", "string", null="0+", default=None),
        f("pattern_type_filter", "int8", "1+", default=3),
        f("principal_filter", "string", null="0+", default=None),
        f("host_filter", "string", null="0+", default=None),
        f("operation", "int8"),
        f("permission_type", "int8"),
    ]


DESCRIBE_ACLS = api(29, "DescribeAcls", "0-3", "2+", request=_filter_fields(), response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("resources", "[]", fields=[
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("pattern_type", "int8", "1+", default=3),
        f("acls", "[]", fields=[
            f("principal", "string"),
            f("host", "string"),
            f("operation", "int8"),
            f("permission_type", "int8"),
        ]),
    ]),
])

CREATE_ACLS = api(30, "CreateAcls", "0-3", "2+", request=[
    f("creations", "[]", fields=[
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("resource_pattern_type", "int8", "1+", default=3),
        f("principal", "string"),
        f("host", "string"),
        f("operation", "int8"),
        f("permission_type", "int8"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("results", "[]", fields=[
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
    ]),
])

DELETE_ACLS = api(31, "DeleteAcls", "0-3", "2+", request=[
    f("filters", "[]", fields=_filter_fields()),
], response=[
    f("throttle_time_ms", "int32"),
    f("filter_results", "[]", fields=[
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("matching_acls", "[]", fields=[
            f("error_code", "int16"),
            f("error_message", "string", null="0+", default=None),
            f("resource_type", "int8"),
            f("resource_name", "string"),
            f("pattern_type", "int8", "1+", default=3),
            f("principal", "string"),
            f("host", "string"),
            f("operation", "int8"),
            f("permission_type", "int8"),
        ]),
    ]),
])

DESCRIBE_USER_SCRAM_CREDENTIALS = api(50, "DescribeUserScramCredentials", "0", "0+", request=[
    f("users", "[]", null="0+", default=None, fields=[
        f("name", "string"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("results", "[]", fields=[
        f("user", "string"),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("credential_infos", "[]", fields=[
            f("mechanism", "int8"),
            f("iterations", "int32"),
        ]),
    ]),
])

ALTER_USER_SCRAM_CREDENTIALS = api(51, "AlterUserScramCredentials", "0", "0+", request=[
    f("deletions", "[]", fields=[
        f("name", "string"),
        f("mechanism", "int8"),
    ]),
    f("upsertions", "[]", fields=[
        f("name", "string"),
        f("mechanism", "int8"),
        f("iterations", "int32"),
        f("salt", "bytes"),
        f("salted_password", "bytes"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("results", "[]", fields=[
        f("user", "string"),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
    ]),
])
