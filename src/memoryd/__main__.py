"""``python -m memoryd`` is the ``memoryd`` command."""

from memoryd.cli import main

if __name__ == "__main__":
    main()
