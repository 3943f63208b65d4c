"""The relay's flow-control sizes (the windows it announces, when it credits them back, its
sockets' water marks) and the kinds of what waits on a stream for window."""

# Receive windows we advertise. Large, so that neither kubelet nor containerd ever waits on us
# for a normal call; a stream's window is also what the relay may buffer for that stream.
STREAM_WINDOW = 4 << 20
CONN_WINDOW = 16 << 20
STREAM_CREDIT_AT = STREAM_WINDOW // 2  # batch WINDOW_UPDATEs: one per half window
CONN_CREDIT_AT = CONN_WINDOW // 4
# A connection's socket write buffer: past HIGH the connections that feed it are no longer
# read, until it is back under LOW.
WRITE_BUFFER_HIGH = 1 << 20
WRITE_BUFFER_LOW = 256 << 10

# What waits in a half's queue: (kind, payload, end). Q_OWN: DATA the relay made itself (an
# intercepted request, a held response): no peer's window to credit when it leaves.
Q_DATA, Q_HEADERS, Q_OWN = 0, 1, 2
