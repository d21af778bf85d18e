"""Group administration APIs: DescribeGroups (15), ListGroups (16),
DeleteGroups (42).

Field versions, nullability and defaults follow Kafka's message schemas
(clients/src/main/resources/common/message/*.json).
"""
from ..schema import api, f

#: AuthorizedOperations default: INT32_MIN means "not requested".
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

DESCRIBE_GROUPS = api(15, "DescribeGroups", "0-5", "5+", request=[
    f("groups", "[]string"),
    f("include_authorized_operations", "bool", "3+"),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("groups", "[]", fields=[
        f("error_code", "int16"),
        f("group_id", "string"),
        f("group_state", "string"),
        f("protocol_type", "string"),
        f("protocol_data", "string"),
        f("members", "[]", fields=[
            f("member_id", "string"),
            f("group_instance_id", "string", "4+", null="4+", default=None),
            f("client_id", "string"),
            f("client_host", "string"),
            f("member_metadata", "bytes"),
            f("member_assignment", "bytes"),
        ]),
        f("authorized_operations", "int32", "3+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]),
])

LIST_GROUPS = api(16, "ListGroups", "0-5", "3+", request=[
    f("states_filter", "[]string", "4+"),
    f("types_filter", "[]string", "5+"),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16"),
    f("groups", "[]", fields=[
        f("group_id", "string"),
        f("protocol_type", "string"),
        f("group_state", "string", "4+"),
        f("group_type", "string", "5+"),
    ]),
])

DELETE_GROUPS = api(42, "DeleteGroups", "0-2", "2+", request=[
    f("groups_names", "[]string"),
], response=[
    f("throttle_time_ms", "int32"),
    f("results", "[]", fields=[
        f("group_id", "string"),
        f("error_code", "int16"),
    ]),
])
