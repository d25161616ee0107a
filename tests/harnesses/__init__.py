"""Programs the tests drive as real processes, runnable by hand from the repository root too.

    kill_resume     SIGKILL a training at random steps, resume each time, compare the end bitwise with a run
                    never interrupted (`python -m tests.harnesses.kill_resume [--save-crashes]`)
    crash_in_save   run `tformer` and SIGKILL it at one chosen moment inside one chosen save of `last`
                    (`python -m tests.harnesses.crash_in_save --save N --at POINT -- train ...`)

tests/training/test_crash_safety.py and test_distributed.py import them.
"""
