from pdctl.cli.entry import main

main()
