"""Every backend's declared tags in one registry (ns-3's "declared trace sources").

Each backend declares the :class:`~collsim.engine.Tag` objects it emits once (:mod:`collsim.backends.nccl.tags`,
:mod:`collsim.backends.gloo.tags`); this module collects them by label. A record's time breakdown is keyed by tag
label, so presentation finds a label's activity and breakdown category here (:func:`tag_for`); a label no backend
declared is an error, never a silent "other".

Examples
--------
>>> tag_for("TCP over loopback").category
'transfer: TCP loopback (CPU + host memory)'
>>> tag_for("NVLink (NVLS)").activity
'send'
>>> tag_for("something new")
Traceback (most recent call last):
...
KeyError: "undeclared tag label 'something new'; declare it in a backend's tags module (collsim.backends.tags)"
"""

from __future__ import annotations

from collections.abc import Iterable

from collsim.backends.background import BACKGROUND_TAG
from collsim.backends.gloo.tags import TAGS as GLOO_TAGS
from collsim.backends.nccl.tags import TAGS as NCCL_TAGS
from collsim.engine import Tag
from collsim.vocab import BREAKDOWN_CATEGORIES

__all__ = ["TAGS", "registry", "tag_for"]


def registry(*declared: Iterable[Tag]) -> dict[str, Tag]:
    """Tags by label from each backend's declarations, checked.

    Parameters
    ----------
    *declared : iterable of Tag
        One backend's declared tags per argument.

    Returns
    -------
    dict of str to Tag
        Label to tag, in declaration order.

    Raises
    ------
    ValueError
        When two different tags share a label, or a tag's category is not one of
        :data:`collsim.vocab.BREAKDOWN_CATEGORIES`.
    """
    out: dict[str, Tag] = {}
    for tags in declared:
        for tag in tags:
            if tag.category not in BREAKDOWN_CATEGORIES:
                raise ValueError(f"tag {tag.label!r}: category {tag.category!r} is not a breakdown category")
            old = out.setdefault(tag.label, tag)
            if old != tag:
                raise ValueError(f"tag label {tag.label!r} declared twice, differently: {old} and {tag}")
    return out


#: Every declared tag of every backend, by label.
TAGS: dict[str, Tag] = registry(NCCL_TAGS, GLOO_TAGS, (BACKGROUND_TAG,))


def tag_for(label: str) -> Tag:
    """The declared tag with display ``label`` (a key of ``Record.breakdown``).

    Raises
    ------
    KeyError
        For a label no backend declared.
    """
    try:
        return TAGS[label]
    except KeyError:
        raise KeyError(
            f"undeclared tag label {label!r}; declare it in a backend's tags module (collsim.backends.tags)"
        ) from None
