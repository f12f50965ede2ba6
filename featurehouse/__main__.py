from featurehouse.cli import main

raise SystemExit(main())
