"""The file I/O both programs share, kept out of the pure contract package (``resource_contract``):
bounded reads of outside files (``reads``), writes and reads that never follow a planted link
(``safe_files``), and reading a configuration file (``config_file``)."""
