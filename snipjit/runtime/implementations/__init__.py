"""What a program step can run on; `choice.IMPLEMENTATIONS` lists them in the order the program asks."""
