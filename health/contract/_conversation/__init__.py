"""Private implementation of the conversation item union; the public face is ``contract.conversation``."""
