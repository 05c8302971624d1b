"""The conformance checks: pytest modules shipped with acl_mem, run by ``acl-mem
conformance`` on an installed package and by the project's test suite."""
