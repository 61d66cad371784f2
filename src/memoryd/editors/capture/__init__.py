"""Conversation capture: editors' hooks (Claude Code) that write each new turn, with a
spool for when the daemon is down and a replay of it when the daemon starts.

- ``fast``: the hook's entry (no click, few imports), which hands a run to ``hook``;
- ``hook``: one run (new turns since a cursor, written within a budget, else spooled);
- ``transcript``: reading Claude Code transcripts into turns;
- ``rpc``: the few socket calls a hook makes; ``spool``: turns kept on disk;
- ``replay``: the daemon's drain of the spool;
- ``config``: the hooks' entries for an editor's settings.
"""
