"""The security admin APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls
(31), DescribeUserScramCredentials (50), AlterUserScramCredentials (51),
and SaslHandshake/SaslAuthenticate on listeners that are not SASL (or
after authentication): ILLEGAL_SASL_STATE, as KafkaApis answers."""
from __future__ import annotations

from collections import Counter

from ..protocol.api import error_response, serves
from ..protocol.errors import Err
from .acl import (CLUSTER_NAME, AclBinding, AclFilter, Operation, PatternType, Permission,
                  ResourceType, validate_binding)
from .store import SCRAM_MECHANISM_CODES, SecurityStore, StoreUnavailable, scram_record

SCRAM_MAX_ITERATIONS = 16384
SCRAM_MIN_ITERATIONS = 4096


class SecurityAdmin:
    def __init__(self, store: SecurityStore, enabled: bool) -> None:
        self.store = store
        self.enabled = enabled  # an authorizer is configured
        self.authorizer = store.authorizer

    async def _store(self, records: list[dict]) -> str | None:
        """Write; None once stored, else why not (in a cluster etcd may not
        answer: the results then carry REQUEST_TIMED_OUT, never NONE)."""
        try:
            await self.store.write(records)
        except StoreUnavailable as exc:
            return str(exc)
        return None

    def _may(self, ctx, op: int) -> bool:
        if not self.enabled:
            return True
        return self.authorizer.authorize(ctx.principal, ctx.client_host, op,
                                         ResourceType.CLUSTER, CLUSTER_NAME)

    # ------------------------------------------------------------- SASL
    @staticmethod
    @serves("SaslHandshake")
    def sasl_handshake(ctx, req: dict) -> dict:
        return error_response(ctx.api_key, ctx.api_version, req, Err.ILLEGAL_SASL_STATE)

    @staticmethod
    @serves("SaslAuthenticate")
    def sasl_authenticate(ctx, req: dict) -> dict:
        return error_response(ctx.api_key, ctx.api_version, req, Err.ILLEGAL_SASL_STATE,
                              "SaslAuthenticate on a listener without SASL, or after "
                              "authentication")

    # ------------------------------------------------------------- ACLs
    @staticmethod
    def _filter(ctx, f: dict) -> AclFilter | str:
        pattern = f.get("pattern_type_filter", PatternType.LITERAL)
        if ctx.api_version == 0:
            pattern = PatternType.LITERAL
        flt = AclFilter(f["resource_type_filter"], f["resource_name_filter"], pattern,
                        f["principal_filter"], f["host_filter"], f["operation"],
                        f["permission_type"])
        try:
            ResourceType(flt.resource_type), PatternType(flt.pattern_type)
            Operation(flt.operation), Permission(flt.permission)
        except ValueError:
            return "Unknown resource type, pattern type, operation or permission in the filter"
        if ResourceType.UNKNOWN in (flt.resource_type,) or flt.pattern_type == 0 or \
                flt.operation == 0 or flt.permission == 0:
            return "The filter has an UNKNOWN field"
        return flt

    @serves("DescribeAcls")
    def describe_acls(self, ctx, req: dict) -> dict:
        def error(code, message):
            return error_response(ctx.api_key, ctx.api_version, req, code, message)
        if not self.enabled:
            return error(Err.SECURITY_DISABLED, "No Authorizer is configured.")
        if not self._may(ctx, Operation.DESCRIBE):
            return error(Err.CLUSTER_AUTHORIZATION_FAILED, None)
        flt = self._filter(ctx, req)
        if isinstance(flt, str):
            return error(Err.INVALID_REQUEST, flt)
        groups: dict[tuple, list] = {}
        for acl in self.authorizer.matching(flt):
            groups.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                 "permission_type": acl.permission})
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
                "resources": [{"resource_type": rt, "resource_name": name, "pattern_type": pt,
                               "acls": acls} for (rt, name, pt), acls in groups.items()]}

    @serves("CreateAcls")
    async def create_acls(self, ctx, req: dict) -> dict:
        creations = req["creations"]
        if not self.enabled or not self._may(ctx, Operation.ALTER):
            code = Err.SECURITY_DISABLED if not self.enabled else Err.CLUSTER_AUTHORIZATION_FAILED
            message = "No Authorizer is configured." if not self.enabled else None
            return error_response(ctx.api_key, ctx.api_version, req, code, message)
        results, records = [], []
        for c in creations:
            pattern = c.get("resource_pattern_type", PatternType.LITERAL)
            acl = AclBinding(c["resource_type"], c["resource_name"], pattern, c["principal"],
                             c["host"], c["operation"], c["permission_type"])
            problem = validate_binding(acl)
            if problem is not None:
                results.append({"error_code": Err.INVALID_REQUEST, "error_message": problem})
                continue
            results.append({"error_code": Err.NONE, "error_message": None})
            # re-creating an ACL is a no-op; in a cluster this node's copy may lag
            # etcd (a delete elsewhere not seen yet), and a put of the same key is harmless
            if acl not in self.authorizer.acls or self.store.backend is not None:
                records.append({"type": "acl", "acl": acl.to_record()})
        failed = await self._store(records)
        if failed is not None:
            results = [r if r["error_code"] else
                       {"error_code": Err.REQUEST_TIMED_OUT, "error_message": failed}
                       for r in results]
        return {"throttle_time_ms": 0, "results": results}

    @serves("DeleteAcls")
    async def delete_acls(self, ctx, req: dict) -> dict:
        filters = req["filters"]
        if not self.enabled or not self._may(ctx, Operation.ALTER):
            code = Err.SECURITY_DISABLED if not self.enabled else Err.CLUSTER_AUTHORIZATION_FAILED
            message = "No Authorizer is configured." if not self.enabled else None
            return error_response(ctx.api_key, ctx.api_version, req, code, message)
        results, records, doomed = [], [], set()
        for f in filters:
            flt = self._filter(ctx, f)
            if isinstance(flt, str):
                results.append({"error_code": Err.INVALID_REQUEST, "error_message": flt,
                                "matching_acls": []})
                continue
            matched = self.authorizer.matching(flt)
            for acl in matched:
                if acl not in doomed:
                    doomed.add(acl)
                    records.append({"type": "acl-delete", "acl": acl.to_record()})
            results.append({"error_code": Err.NONE, "error_message": None, "matching_acls": [
                {"error_code": Err.NONE, "error_message": None, "resource_type": a.resource_type,
                 "resource_name": a.name, "pattern_type": a.pattern_type,
                 "principal": a.principal, "host": a.host, "operation": a.operation,
                 "permission_type": a.permission} for a in matched]})
        failed = await self._store(records)
        if failed is not None:
            results = [r if r["error_code"] else
                       {"error_code": Err.REQUEST_TIMED_OUT, "error_message": failed,
                        "matching_acls": []} for r in results]
        return {"throttle_time_ms": 0, "filter_results": results}

    # ------------------------------------------------------------ SCRAM
    @serves("DescribeUserScramCredentials")
    def describe_scram(self, ctx, req: dict) -> dict:
        if not self._may(ctx, Operation.DESCRIBE):
            return {"throttle_time_ms": 0, "error_code": Err.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "results": []}
        users = self.store.users()
        asked = [u["name"] for u in (req["users"] or [])]
        results = []
        if not asked:
            for user, infos in users.items():
                results.append(self._described(user, infos))
        else:
            counts = Counter(asked)
            for name in dict.fromkeys(asked):
                if counts[name] > 1:
                    results.append({"user": name, "error_code": Err.DUPLICATE_RESOURCE,
                                    "error_message": "Cannot describe SCRAM credentials for the "
                                                     f"same user twice in a single request: "
                                                     f"{name}", "credential_infos": []})
                elif name not in users:
                    results.append({"user": name, "error_code": Err.RESOURCE_NOT_FOUND,
                                    "error_message": "Attempt to describe a user credential "
                                                     f"that does not exist: {name}",
                                    "credential_infos": []})
                else:
                    results.append(self._described(name, users[name]))
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
                "results": results}

    @staticmethod
    def _described(user, infos) -> dict:
        return {"user": user, "error_code": Err.NONE, "error_message": None,
                "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos]}

    @serves("AlterUserScramCredentials")
    async def alter_scram(self, ctx, req: dict) -> dict:
        deletions, upsertions = req["deletions"], req["upsertions"]
        users = list(dict.fromkeys([d["name"] for d in deletions] +
                                   [u["name"] for u in upsertions]))
        if not self._may(ctx, Operation.ALTER):
            return {"throttle_time_ms": 0, "results": [
                {"user": u, "error_code": Err.CLUSTER_AUTHORIZATION_FAILED,
                 "error_message": None} for u in users]}
        errors: dict[str, tuple[int, str]] = {}
        counts = Counter((d["name"], d["mechanism"]) for d in deletions)
        counts.update((u["name"], u["mechanism"]) for u in upsertions)
        for (name, _), n in counts.items():
            if n > 1:
                errors.setdefault(name, (Err.DUPLICATE_RESOURCE,
                                         "A user credential cannot be altered twice in the "
                                         "same request"))
        records: dict[str, list[dict]] = {u: [] for u in users}
        for d in deletions:
            name, mech = d["name"], SCRAM_MECHANISM_CODES.get(d["mechanism"])
            if not name:
                errors.setdefault(name, (Err.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
            elif mech is None:
                errors.setdefault(name, (Err.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
            elif self.store.credential(name, mech) is None:
                errors.setdefault(name, (Err.RESOURCE_NOT_FOUND,
                                         "Attempt to delete a user credential that does not "
                                         "exist"))
            else:
                records[name].append({"type": "scram-delete", "user": name, "mechanism": mech})
        for u in upsertions:
            name, mech = u["name"], SCRAM_MECHANISM_CODES.get(u["mechanism"])
            if not name:
                errors.setdefault(name, (Err.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
            elif mech is None:
                errors.setdefault(name, (Err.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
            elif u["iterations"] < SCRAM_MIN_ITERATIONS:
                errors.setdefault(name, (Err.UNACCEPTABLE_CREDENTIAL, "Too few iterations"))
            elif u["iterations"] > SCRAM_MAX_ITERATIONS:
                errors.setdefault(name, (Err.UNACCEPTABLE_CREDENTIAL, "Too many iterations"))
            elif not u["salt"] or not u["salted_password"]:
                errors.setdefault(name, (Err.UNACCEPTABLE_CREDENTIAL,
                                         "Salt and salted password must not be empty"))
            else:
                records[name].append(scram_record(name, mech, bytes(u["salt"]),
                                                  bytes(u["salted_password"]), u["iterations"]))
        failed = await self._store([r for user, rs in records.items() if user not in errors
                                    for r in rs])
        if failed is not None:
            for user, rs in records.items():
                if rs and user not in errors:
                    errors[user] = (Err.REQUEST_TIMED_OUT, failed)
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": errors.get(u, (Err.NONE, None))[0],
             "error_message": errors.get(u, (Err.NONE, None))[1]} for u in users]}
