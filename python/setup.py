"""Build hook of the tide package: records, at install time, where this
checkout's libtide is likely to be built (TIDE_BUILD_DIR, else <checkout>/build),
so `import tide` finds it after `pip install ./python` from a built tree.
Everything else is in pyproject.toml. See tide/_lib.py for the search order."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    def run(self):
        super().run()
        dirs = []
        if os.environ.get("TIDE_BUILD_DIR"):
            dirs.append(os.path.abspath(os.environ["TIDE_BUILD_DIR"]))
        dirs.append(os.path.join(os.path.dirname(HERE), "build"))
        path = os.path.join(self.build_lib, "tide", "_install_paths.py")
        with open(path, "w") as f:
            f.write("# Written by setup.py when this package was installed.\n")
            f.write("BUILD_DIRS = %r\n" % (dirs,))


setup(cmdclass={"build_py": BuildPy})
