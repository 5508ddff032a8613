def main():
    from esched.core import _probe
    print(_probe.hello())
