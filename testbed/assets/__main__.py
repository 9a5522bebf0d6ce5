"""``python3 -m testbed.assets`` (``hack/test-assets``): see ``testbed.assets.cli``."""

import sys

from testbed.assets.cli import main

sys.exit(main())
