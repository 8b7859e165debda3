from pdctl.cli.app import main

main()
