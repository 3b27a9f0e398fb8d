from lcr.cli import main

raise SystemExit(main())
