package comm

import "os"

var logOut = os.Stderr
