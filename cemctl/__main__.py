"""`python -m cemctl ...`: the same as the `cemctl` command."""

from cemctl.cli import main

if __name__ == "__main__":
    main()
