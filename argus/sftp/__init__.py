"""The SFTP door (issue 53): SSH and SFTP served by the API's own process to Argus's own
users, through the REST files API's path rules (``view``) and ``argus.safefs`` (``fs``)."""

from argus.sftp.door import SftpDoor, sftp_background

__all__ = ["SftpDoor", "sftp_background"]
