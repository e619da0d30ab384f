"""Every bound on what a client can make the sidecar hold or send, in one place.

A client (a hook, a relayed node, or anyone who can reach the socket) decides
the size of what it sends; these limits decide what the sidecar keeps. Each
is several times what a real hook sends, so no legitimate worker meets one;
docs/SECURITY.md ("Bounds") lists them with the tests that prove them.
"""

from __future__ import annotations

#: Characters in an identifier: job id, host, group, op, phase name, Ray ids.
MAX_ID_LEN = 256
#: Labels in a Hello, and characters in a label's key and in its value.
MAX_LABELS = 64
MAX_LABEL_KEY_LEN = 64
MAX_LABEL_VALUE_LEN = 256
#: Active or finished phases in one report.
MAX_PHASES = 64
#: Per-step samples in one report (the hook sends at most 256).
MAX_RECENT = 1024
#: Process groups in one report (the hook tracks at most 256).
MAX_GROUPS = 256
#: Collective samples in one report (the hook sends at most 16).
MAX_SAMPLES = 256
#: Collective issue times per group and report (the hook sends at most 64).
MAX_STARTS = 256
#: Characters of a client-supplied path (the stack file).
MAX_PATH_LEN = 4096
#: A Hello's session secret (the hook draws 16 bytes).
MAX_SECRET_BYTES = 64
MAX_WORLD_SIZE = 1 << 20
#: A step or collective lasting longer than a year is a unit bug, not training.
MAX_DURATION_S = 365 * 86400.0

#: Sessions the registry holds, live and ended. A new one beyond this first
#: evicts the oldest ended session; with every session live it is refused
#: (RESOURCE_EXHAUSTED). Several times the largest fleet bench_scale measures.
MAX_SESSIONS = 10_000
#: Ended sessions kept for status and the DEAD rule: beyond this, the oldest
#: ended go first, so a flood of short-lived clients cannot fill memory.
MAX_ENDED_SESSIONS = 1_000

#: Bytes of one GetStatus reply's rows (the wire limit is 4 MiB); the rows
#: that do not fit are counted in its ``omitted`` field.
MAX_STATUS_BYTES = 3 * 1024 * 1024
#: Characters of a Diagnose reply's text and of its JSON; beyond it they are
#: cut and the reply says how many characters were left out.
MAX_DIAGNOSE_CHARS = 256 * 1024

#: Held-worker entries in one RelayBatch: a node sends at most one per worker
#: stream it verified, and a batch far beyond the sessions kept is a bug.
MAX_HELD = MAX_SESSIONS
#: How old a node's read of a held worker may be when sent, in ms: it reads
#: every second and sends with the next batch (at most 10 s apart).
MAX_HELD_AGE_MS = 60_000

#: Summary mode (JobSync streams, core/job/hub.py): what one upstream holds
#: and takes from a node. A node serves a handful of ranks (8 GPUs); 1,024
#: covers any host. One message is bounded by the ranks it may carry.
MAX_SYNC_NODES = 20_000
MAX_SYNC_JOBS = 1_024
MAX_SYNC_JOBS_PER_NODE = 64
MAX_SYNC_RANKS_PER_NODE = 1_024
MAX_SYNC_MESSAGE_BYTES = 1024 * 1024
#: Characters of an episode note's text and of one "stuck at" place; culprits
#: and places one note may name.
MAX_NOTE_TEXT = 4096
MAX_NOTE_RANKS = 256
