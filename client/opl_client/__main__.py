from opl_client.cli import main

raise SystemExit(main())
