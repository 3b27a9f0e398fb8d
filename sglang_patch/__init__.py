"""SGLang plugin for lcr's cache policies.

SGLang calls ``register`` (entry-point group ``sglang.srt.plugins``, see pyproject)
in the launcher and in every scheduler process it spawns, so the ``lcr-*`` radix
cache backends exist wherever ``--radix-cache-backend`` is resolved.
"""


def register() -> None:
    from lcr.integrations.sglang import register_backends

    register_backends()
