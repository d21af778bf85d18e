"""Per-topic answers of CreateTopics and DeleteTopics, shared by the
single-node handlers (topic_handlers.py) and the cluster's (cluster/node.py)."""
from __future__ import annotations

from typing import Callable, Iterator

from ..protocol.errors import Err

ZERO_UUID = bytes(16)


def create_topic_answer(name: str) -> dict:
    """A CreateTopics topic result before the checks fill it in."""
    return {"name": name, "topic_id": ZERO_UUID, "error_code": Err.NONE,
            "error_message": None, "num_partitions": -1, "replication_factor": -1,
            "configs": None}


def delete_topic_answers(req: dict, answers: list, name_of_id: Callable[[bytes], str | None],
                         id_of_name: Callable[[str], bytes | None]) -> Iterator[tuple[str, dict]]:
    """Append one DeleteTopics answer per named topic to `answers`, in request
    order, and yield (name, answer) for each one that names a topic to delete.
    Lazy, so each lookup sees the deletions made for the topics before it."""
    targets = [(name, None) for name in req.get("topic_names") or ()]
    for t in req.get("topics") or ():  # v6+: by name or by id
        targets.append((t["name"], t["topic_id"]))
    for name, topic_id in targets:
        if name is None and topic_id is not None:
            name = name_of_id(topic_id)
        answer = {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": Err.NONE,
                  "error_message": None}
        answers.append(answer)
        if name is None:
            answer["error_code"] = Err.UNKNOWN_TOPIC_ID
            continue
        known = id_of_name(name)
        if known is not None:
            answer["topic_id"] = known
        yield name, answer
