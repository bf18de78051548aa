if __name__ == "__main__":
    from fabricscope.supervise import die_with_parent_from_env

    die_with_parent_from_env()  # a child of `up`: stop with it, even after its kill -9

    from fabricscope.cli import main

    main()
