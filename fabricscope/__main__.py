if __name__ == "__main__":
    from fabricscope.cli import main

    main()
