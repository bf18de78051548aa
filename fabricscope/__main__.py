if __name__ == "__main__":
    from fabricscope.supervise import die_with_parent_from_env

    die_with_parent_from_env()  # a child of `up`: stop with it, even after its kill -9

    from fabricscope.cli import main
    from fabricscope.stopping import forget_caught_interrupts

    try:
        main()
    finally:
        forget_caught_interrupts()  # exit with main's code, not by SIGINT (see there)
