module example.com/failing

go 1.24
