"""ApiVersions (key 18)."""
from ..schema import api, f

API_VERSIONS = api(18, "ApiVersions", "0-4", "3+", request=[
    f("client_software_name", "string", "3+"),
    f("client_software_version", "string", "3+"),
], response=[
    f("error_code", "int16"),
    f("api_keys", "[]", fields=[
        f("api_key", "int16"),
        f("min_version", "int16"),
        f("max_version", "int16"),
    ]),
    f("throttle_time_ms", "int32", "1+"),
    f("supported_features", "[]", "3+", tag=0, fields=[
        f("name", "string"),
        f("min_version", "int16"),
        f("max_version", "int16"),
    ]),
    f("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
    f("finalized_features", "[]", "3+", tag=2, fields=[
        f("name", "string"),
        f("max_version_level", "int16"),
        f("min_version_level", "int16"),
    ]),
    f("zk_migration_ready", "bool", "3+", tag=3),
])
